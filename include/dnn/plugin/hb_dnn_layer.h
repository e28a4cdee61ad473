/*
 * Custom CPU layer API of the board SDK (C++). vnpu has no custom-operator plugins;
 * this header exists so that applications that include it keep compiling. It
 * declares nothing.
 */
#ifndef DNN_PLUGIN_HB_DNN_LAYER_H_
#define DNN_PLUGIN_HB_DNN_LAYER_H_

#include "../hb_dnn.h"

#endif /* DNN_PLUGIN_HB_DNN_LAYER_H_ */
