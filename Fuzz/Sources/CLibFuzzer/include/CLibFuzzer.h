// libFuzzer's entry for programs that have their own main (compiler-rt's
// FuzzerInterface.h). SwiftPM gives every executable its own entry point, so
// the driver calls this instead of linking libFuzzer's main.
#ifndef HALLPASS_CLIBFUZZER_H
#define HALLPASS_CLIBFUZZER_H
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*test_one_input)(const uint8_t *data, size_t size));

#endif
