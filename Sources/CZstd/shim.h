#ifndef HALLPASS_CZSTD_SHIM_H
#define HALLPASS_CZSTD_SHIM_H

// libzstd's stable API (Debian's libzstd-dev): the store's deltas are zstd
// frames made against the previous store as a prefix (`zstd --patch-from`).
// Only the BundleDelta module imports this; filter-data never links it.
#include <zstd.h>

#endif
