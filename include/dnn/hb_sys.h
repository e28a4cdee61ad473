/*
 * hbSys memory API (vnpu): hbSysMem, hbSysAlloc[Cached]Mem, hbSysFlushMem,
 * hbSysWriteMem/ReadMem, hbSysFreeMem, hbSysRegisterMem/UnregisterMem and the
 * hbSysStatus codes. All declarations live in vnpu.h.
 */
#ifndef DNN_HB_SYS_H_
#define DNN_HB_SYS_H_

#include <stdint.h>

#include "../vnpu.h"

#endif /* DNN_HB_SYS_H_ */
