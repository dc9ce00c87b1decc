#define _GNU_SOURCE
#include "CHallpassSys.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <string.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/ptrace.h>
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

static volatile sig_atomic_t hp_stop_flag = 0;

static void hp_record_stop(int signal_number) {
    (void)signal_number;
    hp_stop_flag = 1;
}

int hp_install_stop_handlers(void) {
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = hp_record_stop;
    sigemptyset(&action.sa_mask);
    // No SA_RESTART: a blocking poll returns EINTR at once.
    if (sigaction(SIGTERM, &action, NULL) != 0) return -1;
    if (sigaction(SIGINT, &action, NULL) != 0) return -1;
    // A parent may hand down a mask that blocks these (a process spawner often does).
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    return sigprocmask(SIG_UNBLOCK, &stop_signals, NULL);
}

int hp_stop_requested(void) { return hp_stop_flag != 0; }

long hp_ptrace_traceme(void) { return ptrace(PTRACE_TRACEME, 0, NULL, NULL); }

int hp_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int hp_accept_cloexec(int listener) { return accept4(listener, NULL, NULL, SOCK_CLOEXEC); }

int hp_spawn_add_close_from(posix_spawn_file_actions_t *actions, int lowest) {
    return posix_spawn_file_actions_addclosefrom_np(actions, lowest);
}

int hp_close_from(int lowest) {
    if (syscall(SYS_close_range, (unsigned int)lowest, ~0U, 0) == 0) return 0;
    if (errno != ENOSYS) return -1;
    struct rlimit limit;
    long highest = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY ? (long)limit.rlim_cur : 65536;
    for (long fd = lowest; fd < highest; fd++) close((int)fd);
    return 0;
}
