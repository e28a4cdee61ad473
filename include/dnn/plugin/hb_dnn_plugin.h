/*
 * Custom CPU operator registration of the board SDK (C++). vnpu has no plugin
 * mechanism; this header exists so that applications that include it keep
 * compiling. It declares nothing.
 */
#ifndef DNN_PLUGIN_HB_DNN_PLUGIN_H_
#define DNN_PLUGIN_HB_DNN_PLUGIN_H_

#include "hb_dnn_layer.h"

#endif /* DNN_PLUGIN_HB_DNN_PLUGIN_H_ */
