// Nothing to compile: the header declares a function of compiler-rt's libFuzzer.
#include "CLibFuzzer.h"
