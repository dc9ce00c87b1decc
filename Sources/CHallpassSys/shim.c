#define _GNU_SOURCE
#include "CHallpassSys.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

_Static_assert(sizeof(uid_t) == 4, "uid_t is 32 bits on Linux");

int hp_set_no_new_privs(void) { return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); }

int hp_set_keep_caps(int on) { return prctl(PR_SET_KEEPCAPS, on ? 1 : 0, 0, 0, 0); }

int hp_setresuid(uid_t real, uid_t effective, uid_t saved) { return setresuid(real, effective, saved); }

int hp_setresgid(gid_t real, gid_t effective, gid_t saved) { return setresgid(real, effective, saved); }

int hp_capset(uint64_t effective, uint64_t permitted, uint64_t inheritable) {
    struct __user_cap_header_struct header = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct data[2] = {
        { .effective = (uint32_t)effective, .permitted = (uint32_t)permitted, .inheritable = (uint32_t)inheritable },
        { .effective = (uint32_t)(effective >> 32), .permitted = (uint32_t)(permitted >> 32),
          .inheritable = (uint32_t)(inheritable >> 32) },
    };
    return (int)syscall(SYS_capset, &header, data);
}

int hp_capget(uint64_t *effective, uint64_t *permitted, uint64_t *inheritable) {
    struct __user_cap_header_struct header = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct data[2] = { { 0 }, { 0 } };
    int rc = (int)syscall(SYS_capget, &header, data);
    if (rc != 0) return rc;
    *effective = (uint64_t)data[0].effective | ((uint64_t)data[1].effective << 32);
    *permitted = (uint64_t)data[0].permitted | ((uint64_t)data[1].permitted << 32);
    *inheritable = (uint64_t)data[0].inheritable | ((uint64_t)data[1].inheritable << 32);
    return 0;
}

int hp_capbset_drop(int cap) { return prctl(PR_CAPBSET_DROP, cap, 0, 0, 0); }

int hp_clear_ambient_caps(void) { return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); }
