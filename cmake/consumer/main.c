/* Consumer of an installed vnpu: includes the board-style headers, links vnpu::vnpu. */
#include <stdio.h>
#include <string.h>

#include <dnn/hb_dnn.h>
#include <dnn/hb_dnn_status.h>
#include <dnn/hb_sys.h>

int main(void) {
  hbSysMem mem;
  hbDNNInferCtrlParam ctrl;
  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
  printf("consumer: libdnn %s, vnpu %s\n", hbDNNGetVersion(), vnpuGetVersion());
  if (hbSysAllocMem(&mem, 64) != HB_SYS_SUCCESS || hbSysFreeMem(&mem) != HB_SYS_SUCCESS) return 1;
  if (hbDNNReleaseTask(NULL) != HB_DNN_INVALID_TASK_HANDLE) return 1;
  return strlen(hbDNNGetErrorDesc(HB_DNN_TIMEOUT)) > 0 && ctrl.priority == 0 ? 0 : 1;
}
