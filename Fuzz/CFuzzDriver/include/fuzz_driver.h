#ifndef CONCIERGE_FUZZ_DRIVER_H
#define CONCIERGE_FUZZ_DRIVER_H
#include <stddef.h>
#include <stdint.h>

/// libFuzzer's driver (in clang's libFuzzer runtime, linked by `-sanitize=fuzzer`). SwiftPM
/// names an executable's entry point `<module>_main` and aliases `main` to it, so
/// `concierge-fuzz` starts libFuzzer through this call rather than through libFuzzer's own
/// `main`.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
