/*
 * abi_layout: the C side of the struct layout contract. Sizes and offsets of every
 * hbDNN struct are checked at compile time (a failed check is a negative array size)
 * against the LP64 values of the 1.18+/1.24 headers, and printed at run time.
 */
#include <stddef.h>
#include <stdio.h>

#include "dnn/hb_dnn.h"
#include "dnn/hb_dnn_ext.h"

#define STATIC_CHECK(name, cond) typedef char static_check_##name[(cond) ? 1 : -1]

#if defined(__LP64__) || defined(_LP64)
STATIC_CHECK(sysmem_size, sizeof(hbSysMem) == 24);
STATIC_CHECK(sysmem_viraddr, offsetof(hbSysMem, virAddr) == 8);
STATIC_CHECK(sysmem_memsize, offsetof(hbSysMem, memSize) == 16);
STATIC_CHECK(shape_size, sizeof(hbDNNTensorShape) == 36);
STATIC_CHECK(shift_size, sizeof(hbDNNQuantiShift) == 16);
STATIC_CHECK(scale_size, sizeof(hbDNNQuantiScale) == 32);
STATIC_CHECK(scale_zp, offsetof(hbDNNQuantiScale, zeroPointData) == 24);
STATIC_CHECK(props_size, sizeof(hbDNNTensorProperties) == 176);
STATIC_CHECK(props_aligned, offsetof(hbDNNTensorProperties, alignedShape) == 36);
STATIC_CHECK(props_layout, offsetof(hbDNNTensorProperties, tensorLayout) == 72);
STATIC_CHECK(props_type, offsetof(hbDNNTensorProperties, tensorType) == 76);
STATIC_CHECK(props_shift, offsetof(hbDNNTensorProperties, shift) == 80);
STATIC_CHECK(props_scale, offsetof(hbDNNTensorProperties, scale) == 96);
STATIC_CHECK(props_quanti, offsetof(hbDNNTensorProperties, quantiType) == 128);
STATIC_CHECK(props_axis, offsetof(hbDNNTensorProperties, quantizeAxis) == 132);
STATIC_CHECK(props_bytes, offsetof(hbDNNTensorProperties, alignedByteSize) == 136);
STATIC_CHECK(props_stride, offsetof(hbDNNTensorProperties, stride) == 140);
STATIC_CHECK(tensor_size, sizeof(hbDNNTensor) == 272);
STATIC_CHECK(tensor_props, offsetof(hbDNNTensor, properties) == 96);
STATIC_CHECK(roi_size, sizeof(hbDNNRoi) == 16);
STATIC_CHECK(ctrl_size, sizeof(hbDNNInferCtrlParam) == 32);
STATIC_CHECK(ctrl_more, offsetof(hbDNNInferCtrlParam, more) == 12);
STATIC_CHECK(ctrl_custom, offsetof(hbDNNInferCtrlParam, customId) == 16);
STATIC_CHECK(ctrl_reserved2, offsetof(hbDNNInferCtrlParam, reserved2) == 28);
#endif
STATIC_CHECK(status_values, HB_DNN_INVALID_ARGUMENT == -6000001 && HB_DNN_MULTI_PROGRESS_USE_ERROR == -6000016);
STATIC_CHECK(sys_values, HB_SYS_INVALID_ARGUMENT == -6000129 && HB_SYS_REGISTER_MEM_FAILED == -6000131);
STATIC_CHECK(type_values, HB_DNN_IMG_TYPE_NV12 == 1 && HB_DNN_TENSOR_TYPE_F32 == 13 && HB_DNN_TENSOR_TYPE_MAX == 19);
STATIC_CHECK(layout_values, HB_DNN_LAYOUT_NCHW == 2 && HB_DNN_LAYOUT_NONE == 255 && HB_DNN_LAYOUT_NHCW_NATIVE == 1);
STATIC_CHECK(prio_values, HB_DNN_PRIORITY_PREEMP == 255 && HB_DNN_PRIORITY_HIGHEST == 255);
STATIC_CHECK(quanti_values, NONE == 0 && SHIFT == 1 && SCALE == 2);
STATIC_CHECK(flush_values, HB_SYS_MEM_CACHE_INVALIDATE == 1 && HB_SYS_MEM_CACHE_CLEAN == 2);

int main(void) {
  hbDNNInferCtrlParam p;
  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&p);
  if (p.bpuCoreId != 0 || p.dspCoreId != 0 || p.priority != 0 || p.more != 0 || p.customId != 0) {
    fprintf(stderr, "HB_DNN_INITIALIZE_INFER_CTRL_PARAM left a non-default field\n");
    return 1;
  }
  printf("hbSysMem %u, hbDNNTensorProperties %u, hbDNNTensor %u, hbDNNInferCtrlParam %u bytes\n",
         (unsigned)sizeof(hbSysMem), (unsigned)sizeof(hbDNNTensorProperties), (unsigned)sizeof(hbDNNTensor),
         (unsigned)sizeof(hbDNNInferCtrlParam));
  printf("abi_layout: ok\n");
  return 0;
}
