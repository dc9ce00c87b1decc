#ifndef HALLPASS_CSECCOMP_SHIM_H
#define HALLPASS_CSECCOMP_SHIM_H

#include <stdint.h>
#include <seccomp.h>

// SCMP_ACT_ERRNO is a function-like macro, which Swift does not import.
static inline uint32_t hp_scmp_act_errno(uint16_t error) { return SCMP_ACT_ERRNO(error); }

#endif
