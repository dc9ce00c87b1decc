#define _GNU_SOURCE
#include "CHallpassSys.h"

#include <netinet/in.h>  // before the linux/ headers (struct in_addr)
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
#include <sched.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <stdlib.h>
#include <unistd.h>
#include <linux/inet_diag.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>

_Static_assert(sizeof(uid_t) == 4, "uid_t is 32 bits on Linux");

int hp_set_no_new_privs(void) { return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); }

int hp_set_keep_caps(int on) { return prctl(PR_SET_KEEPCAPS, on ? 1 : 0, 0, 0, 0); }

int hp_set_undumpable(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }

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

// MARK: cutting open connections (filter-control, when the policy turns against them)


/// A netlink request buffer with attribute helpers (no libmnl in filter-control).
struct hp_nl_message {
    union {
        struct nlmsghdr header;
        unsigned char bytes[512];
    } buffer;
};

static struct nlattr *hp_nl_put(struct hp_nl_message *message, uint16_t type, const void *data, uint16_t length) {
    struct nlattr *attribute = (struct nlattr *)(message->buffer.bytes + NLMSG_ALIGN(message->buffer.header.nlmsg_len));
    attribute->nla_type = type;
    attribute->nla_len = (uint16_t)(NLA_HDRLEN + length);
    if (length > 0) memcpy((unsigned char *)attribute + NLA_HDRLEN, data, length);
    message->buffer.header.nlmsg_len = NLMSG_ALIGN(message->buffer.header.nlmsg_len) + NLA_ALIGN(attribute->nla_len);
    return attribute;
}

static void hp_nl_end_nest(struct hp_nl_message *message, struct nlattr *nest) {
    nest->nla_len = (uint16_t)((message->buffer.bytes + message->buffer.header.nlmsg_len) - (unsigned char *)nest);
}

/// Sends one request and reads its acknowledgement: 0, or the negative errno the kernel answered.
static int hp_nl_transact(int protocol, struct nlmsghdr *request) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol);
    if (fd < 0) return -errno;
    struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
    int result = 0;
    if (sendto(fd, request, request->nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
        result = -errno;
    } else {
        unsigned char answer[1024];
        ssize_t count = recv(fd, answer, sizeof(answer), 0);
        if (count < 0) {
            result = -errno;
        } else {
            struct nlmsghdr *header = (struct nlmsghdr *)answer;
            if (NLMSG_OK(header, (unsigned int)count) && header->nlmsg_type == NLMSG_ERROR) {
                result = ((struct nlmsgerr *)NLMSG_DATA(header))->error;
            }
        }
    }
    close(fd);
    return result;
}

int hp_conntrack_set_mark(int family, uint8_t protocol, hp_ip_address source, hp_ip_address destination, uint16_t source_port,
                          uint16_t destination_port, uint32_t value, uint32_t mask) {
    struct hp_nl_message message;
    memset(&message, 0, sizeof(message));
    message.buffer.header.nlmsg_len = NLMSG_LENGTH(sizeof(struct nfgenmsg));
    message.buffer.header.nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
    message.buffer.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    struct nfgenmsg *generic = NLMSG_DATA(&message.buffer.header);
    generic->nfgen_family = (uint8_t)family;
    generic->version = NFNETLINK_V0;
    size_t address_length = family == AF_INET ? 4 : 16;
    struct nlattr *tuple = hp_nl_put(&message, CTA_TUPLE_ORIG | NLA_F_NESTED, NULL, 0);
    struct nlattr *ip = hp_nl_put(&message, CTA_TUPLE_IP | NLA_F_NESTED, NULL, 0);
    hp_nl_put(&message, family == AF_INET ? CTA_IP_V4_SRC : CTA_IP_V6_SRC, source.bytes, (uint16_t)address_length);
    hp_nl_put(&message, family == AF_INET ? CTA_IP_V4_DST : CTA_IP_V6_DST, destination.bytes, (uint16_t)address_length);
    hp_nl_end_nest(&message, ip);
    struct nlattr *ports = hp_nl_put(&message, CTA_TUPLE_PROTO | NLA_F_NESTED, NULL, 0);
    hp_nl_put(&message, CTA_PROTO_NUM, &protocol, 1);
    uint16_t source_be = htons(source_port), destination_be = htons(destination_port);
    hp_nl_put(&message, CTA_PROTO_SRC_PORT, &source_be, 2);
    hp_nl_put(&message, CTA_PROTO_DST_PORT, &destination_be, 2);
    hp_nl_end_nest(&message, ports);
    hp_nl_end_nest(&message, tuple);
    uint32_t value_be = htonl(value), mask_be = htonl(mask);
    hp_nl_put(&message, CTA_MARK, &value_be, 4);
    hp_nl_put(&message, CTA_MARK_MASK, &mask_be, 4);
    return hp_nl_transact(NETLINK_NETFILTER, &message.buffer.header);
}

int hp_socket_destroy(int family, uint8_t protocol, hp_ip_address local, hp_ip_address remote, uint16_t local_port, uint16_t remote_port) {
    struct {
        struct nlmsghdr header;
        struct inet_diag_req_v2 request;
    } message;
    memset(&message, 0, sizeof(message));
    message.header.nlmsg_len = sizeof(message);
    message.header.nlmsg_type = SOCK_DESTROY;
    message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    message.request.sdiag_family = (uint8_t)family;
    message.request.sdiag_protocol = protocol;
    message.request.idiag_states = ~0U;
    message.request.id.idiag_sport = htons(local_port);
    message.request.id.idiag_dport = htons(remote_port);
    size_t address_length = family == AF_INET ? 4 : 16;
    memcpy(message.request.id.idiag_src, local.bytes, address_length);
    memcpy(message.request.id.idiag_dst, remote.bytes, address_length);
    message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    return hp_nl_transact(NETLINK_SOCK_DIAG, &message.header);
}

int64_t hp_socket_uid(int family, uint8_t protocol, hp_ip_address local, hp_ip_address remote, uint16_t local_port, uint16_t remote_port) {
    struct {
        struct nlmsghdr header;
        struct inet_diag_req_v2 request;
    } message;
    memset(&message, 0, sizeof(message));
    message.header.nlmsg_len = sizeof(message);
    message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    message.header.nlmsg_flags = NLM_F_REQUEST;
    message.request.sdiag_family = (uint8_t)family;
    message.request.sdiag_protocol = protocol;
    message.request.idiag_states = ~0U;
    message.request.id.idiag_sport = htons(local_port);
    message.request.id.idiag_dport = htons(remote_port);
    size_t address_length = family == AF_INET ? 4 : 16;
    memcpy(message.request.id.idiag_src, local.bytes, address_length);
    memcpy(message.request.id.idiag_dst, remote.bytes, address_length);
    message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) return -errno;
    struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
    int64_t result = -ENOENT;
    if (sendto(fd, &message, sizeof(message), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
        result = -errno;
    } else {
        // One answer: the socket (inet_diag_msg), or an error.
        unsigned char answer[1024] __attribute__((aligned(NLMSG_ALIGNTO)));
        ssize_t count = recv(fd, answer, sizeof(answer), 0);
        if (count < 0) {
            result = -errno;
        } else {
            struct nlmsghdr *header = (struct nlmsghdr *)answer;
            if (NLMSG_OK(header, (unsigned int)count)) {
                if (header->nlmsg_type == NLMSG_ERROR) {
                    int error = ((struct nlmsgerr *)NLMSG_DATA(header))->error;
                    result = error < 0 ? error : -ENOENT;
                } else if (header->nlmsg_type == SOCK_DIAG_BY_FAMILY && header->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
                    result = ((struct inet_diag_msg *)NLMSG_DATA(header))->idiag_uid;
                }
            }
        }
    }
    close(fd);
    return result;
}

int hp_tcp_listener(int family, hp_ip_address address, uint16_t port, int backlog) {
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    int one = 1;
    int rc;
    if (family == AF_INET6) {
        struct sockaddr_in6 socket_address;
        memset(&socket_address, 0, sizeof(socket_address));
        socket_address.sin6_family = AF_INET6;
        socket_address.sin6_port = htons(port);
        memcpy(&socket_address.sin6_addr, address.bytes, 16);
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0) goto fail;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) goto fail;
        rc = bind(fd, (struct sockaddr *)&socket_address, sizeof(socket_address));
    } else {
        struct sockaddr_in socket_address;
        memset(&socket_address, 0, sizeof(socket_address));
        socket_address.sin_family = AF_INET;
        socket_address.sin_port = htons(port);
        memcpy(&socket_address.sin_addr, address.bytes, 4);
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) goto fail;
        rc = bind(fd, (struct sockaddr *)&socket_address, sizeof(socket_address));
    }
    if (rc != 0 || listen(fd, backlog) != 0) goto fail;
    return fd;
fail:;
    int error = errno;
    close(fd);
    return -error;
}

int hp_enter_network_namespace(int fd) { return setns(fd, CLONE_NEWNET); }

int hp_connect_unix_as(const char *path, uid_t uid, gid_t gid) {
    struct sockaddr_un address;
    memset(&address, 0, sizeof(address));
    address.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(address.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(address.sun_path, path);
    uid_t real_uid, effective_uid, saved_uid;
    gid_t real_gid, effective_gid, saved_gid;
    gid_t groups[256];
    if (getresuid(&real_uid, &effective_uid, &saved_uid) != 0 || getresgid(&real_gid, &effective_gid, &saved_gid) != 0) return -1;
    int group_count = getgroups(256, groups);
    if (group_count < 0) return -1;
    // Groups first (that needs CAP_SETGID, which the uid change takes away).
    // -1 keeps the saved ids, so the thread may take back its own.
    if (syscall(SYS_setgroups, 1, &gid) != 0) return -1;
    if (syscall(SYS_setresgid, gid, gid, (gid_t)-1) != 0) {
        int error = errno;
        if (syscall(SYS_setgroups, group_count, groups) != 0) abort();
        errno = error;
        return -1;
    }
    int result = -1, error = 0;
    if (syscall(SYS_setresuid, uid, uid, (uid_t)-1) != 0) {
        error = errno;
    } else {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            error = errno;
        } else if (connect(fd, (struct sockaddr *)&address, sizeof(address)) != 0) {
            error = errno;
            close(fd);
        } else {
            result = fd;
        }
        if (syscall(SYS_setresuid, real_uid, effective_uid, saved_uid) != 0) abort();
    }
    if (syscall(SYS_setresgid, real_gid, effective_gid, saved_gid) != 0) abort();
    if (syscall(SYS_setgroups, group_count, groups) != 0) abort();
    errno = error;
    return result;
}
