#ifndef HALLPASS_CNETFILTERQUEUE_SHIM_H
#define HALLPASS_CNETFILTERQUEUE_SHIM_H

// <netinet/in.h> must come before any <linux/*.h>: otherwise Swift sees two
// different definitions of in_addr and refuses to import either.
#include <netinet/in.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/socket.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <libmnl/libmnl.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#endif
