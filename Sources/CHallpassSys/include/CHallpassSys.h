#ifndef HALLPASS_CHALLPASSSYS_H
#define HALLPASS_CHALLPASSSYS_H

#include <stdint.h>
#include <sys/types.h>
#include <linux/sched.h>  // CLONE_THREAD, for the seccomp clone rule
#include <spawn.h>

// Calls Swift cannot import directly: `prctl` is variadic and `setresuid` /
// `setresgid` are declared only under _GNU_SOURCE. Each returns 0 on success
// and -1 with errno set, exactly like the wrapped call.

/// prctl(PR_SET_NO_NEW_PRIVS, 1): exec can never grant privileges again.
int hp_set_no_new_privs(void);
/// prctl(PR_SET_KEEPCAPS, on): keep permitted capabilities across setuid.
int hp_set_keep_caps(int on);
/// prctl(PR_SET_DUMPABLE, 0): no core file and no /proc/PID/mem for anyone but
/// root-equivalents, whatever fs.suid_dumpable says (hallpass-proxy holds the
/// interception CA's key in its memory).
int hp_set_undumpable(void);
int hp_setresuid(uid_t real, uid_t effective, uid_t saved);
int hp_setresgid(gid_t real, gid_t effective, gid_t saved);
/// Sets the effective, permitted and inheritable capability sets (v3, 64 bits).
int hp_capset(uint64_t effective, uint64_t permitted, uint64_t inheritable);
/// Reads the calling thread's capability sets.
int hp_capget(uint64_t *effective, uint64_t *permitted, uint64_t *inheritable);
/// Drops `cap` from the bounding set (prctl PR_CAPBSET_DROP).
int hp_capbset_drop(int cap);
/// Clears the ambient capability set (prctl PR_CAP_AMBIENT_CLEAR_ALL).
int hp_clear_ambient_caps(void);

/// ptrace(PTRACE_TRACEME): `ptrace` is variadic. Used only to prove the sandbox refuses it.
long hp_ptrace_traceme(void);

/// Installs SIGTERM and SIGINT handlers that only record the request, so the
/// data path can finish its batch, flush verdicts and exit cleanly.
int hp_install_stop_handlers(void);
/// Whether SIGTERM or SIGINT has arrived since the handlers were installed.
int hp_stop_requested(void);

/// A read prefetch hint: starts loading the cache line at `address` without
/// waiting for it. The rule store issues one per name suffix before probing,
/// so the few cache misses of a lookup overlap instead of queueing.
/// accept4(listener, NULL, NULL, SOCK_CLOEXEC).
int hp_accept_cloexec(int listener);

/// posix_spawn_file_actions_addclosefrom_np (glibc 2.34+, declared only under
/// _GNU_SOURCE): the child closes every descriptor from `lowest` up, so it
/// holds exactly the descriptors it was given, whatever the parent has open.
int hp_spawn_add_close_from(posix_spawn_file_actions_t *actions, int lowest);

/// Closes every descriptor from `lowest` up (close_range(2), Linux 5.9+; a
/// loop over the descriptor limit where the kernel lacks it). Returns 0, or
/// -1 with errno set.
int hp_close_from(int lowest);

static inline void hp_prefetch_read(const void *address) { __builtin_prefetch(address, 0, 1); }

/// An IPv4 or IPv6 address in network order, passed by value (so Swift
/// hands it over without a pointer): IPv4 in the first 4 bytes.
typedef struct {
    uint8_t bytes[16];
} hp_ip_address;
_Static_assert(sizeof(hp_ip_address) == 16, "hp_ip_address is the 16 bytes of an IPv6 address, no padding");

/// Changes the connection mark of the conntrack entry whose original
/// direction is this tuple (addresses of `family`): the bits in `mask`
/// become those of `value`, the others stay (ctnetlink, CTA_MARK with
/// CTA_MARK_MASK). 0, or a negative errno (-ENOENT: no such connection).
int hp_conntrack_set_mark(int family, uint8_t protocol, hp_ip_address source, hp_ip_address destination, uint16_t source_port,
                          uint16_t destination_port, uint32_t value, uint32_t mask);

/// Destroys the local socket with this 4-tuple (sock_diag SOCK_DESTROY): a
/// TCP connection is reset at once (the program sees ECONNABORTED, the peer
/// an RST), a UDP socket reports an error. 0, or a negative errno.
int hp_socket_destroy(int family, uint8_t protocol, hp_ip_address local, hp_ip_address remote, uint16_t local_port, uint16_t remote_port);

/// The uid of the local socket with this 4-tuple (sock_diag SOCK_DIAG_BY_FAMILY,
/// one exact lookup, no dump): the inspection proxy asks who opened a
/// connection the kernel redirected to it (`local` is the client's end, `remote`
/// the address it connected to). The uid, or a negative errno (-ENOENT: no such socket).
int64_t hp_socket_uid(int family, uint8_t protocol, hp_ip_address local, hp_ip_address remote, uint16_t local_port, uint16_t remote_port);

/// A listening TCP socket (close-on-exec, non-blocking) on `address` and
/// `port` (SO_REUSEADDR; IPv6 only, for AF_INET6): the inspection proxy makes
/// its listeners with this before its sandbox, which has no bind or listen.
/// The descriptor, or a negative errno.
int hp_tcp_listener(int family, hp_ip_address address, uint16_t port, int backlog);

/// setns(fd, CLONE_NEWNET) for the calling thread (tests run code inside a test namespace).
int hp_enter_network_namespace(int fd);

/// Connects a new AF_UNIX stream socket (close-on-exec) to `path` as the
/// user `uid` with group `gid`: the calling thread alone takes that uid and
/// gid (raw setresuid/setresgid/setgroups system calls, which change one
/// thread where glibc's wrappers change every thread), connects, and takes
/// its own identity back before returning. The kernel records the
/// connecting credentials (SO_PEERCRED) at connect, so the peer (a user's
/// D-Bus daemon) sees that user; nothing else runs as the user. Needs
/// CAP_SETUID and CAP_SETGID. Returns the descriptor, or -1 with errno set.
/// If the thread cannot take its identity back, the process aborts rather
/// than go on with a thread of the wrong identity.
int hp_connect_unix_as(const char *path, uid_t uid, gid_t gid);

#endif
