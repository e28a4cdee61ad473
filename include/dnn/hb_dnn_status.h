/*
 * hbDNN status codes (hbDNNStatus) and hbDNNGetErrorDesc (vnpu). All declarations
 * live in vnpu.h; for the cause of a failure see vnpuGetLastErrorDetail().
 */
#ifndef DNN_HB_DNN_STATUS_H_
#define DNN_HB_DNN_STATUS_H_

#include <stdint.h>

#include "../vnpu.h"

#endif /* DNN_HB_DNN_STATUS_H_ */
