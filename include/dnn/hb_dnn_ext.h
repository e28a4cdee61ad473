/*
 * hbDNN extras (vnpu): input source, latency estimates, layout names,
 * hbDNNUnquantizeByScale, padding (+WithStride) and hbDNNConvertLayout.
 * Declarations live in vnpu.h. Board-only queries (output operator type,
 * embedded descriptions, native layouts) are not provided.
 */
#ifndef DNN_HB_DNN_EXT_H_
#define DNN_HB_DNN_EXT_H_

#include "hb_dnn.h"
#include "hb_sys.h"

#endif /* DNN_HB_DNN_EXT_H_ */
