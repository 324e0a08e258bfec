// Declarations only (see include/fuzz_driver.h); SwiftPM needs one source file per C target.
#include "fuzz_driver.h"
