/*
 * hbDNN-compatible core header (vnpu). Source-compatible with the board SDK's
 * dnn/hb_dnn.h (libdnn 1.18+/1.22/1.24 layout): every declaration lives in vnpu.h;
 * this file adds what cbindgen cannot express.
 */
#ifndef DNN_HB_DNN_H_
#define DNN_HB_DNN_H_

#include "../vnpu.h"
#include "hb_sys.h"

/*
 * Sets every field of an hbDNNInferCtrlParam to its default (any core, lowest
 * priority, no `more`, customId 0). A statement block: write
 * `HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&param);`.
 */
#define HB_DNN_INITIALIZE_INFER_CTRL_PARAM(param) \
  {                                               \
    (param)->bpuCoreId = HB_BPU_CORE_ANY;         \
    (param)->dspCoreId = HB_DSP_CORE_ANY;         \
    (param)->priority = HB_DNN_PRIORITY_LOWEST;   \
    (param)->more = false;                        \
    (param)->customId = 0;                        \
    (param)->reserved1 = 0;                       \
    (param)->reserved2 = 0;                       \
  }

#endif /* DNN_HB_DNN_H_ */
