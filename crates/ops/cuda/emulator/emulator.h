// The launch interface of the emulator (emulate.h has the device side). build.rs generates
// one `wick_emu_<kernel>` entry point per kernel with `wick_emu::launch`.
#pragma once

#include "emulate.h"

// A launch configuration, as the Rust side computes it (`wick_ops::gpu::Launch`,
// `#[repr(C)]`).
struct WickLaunch {
    unsigned int grid[3];
    unsigned int block[3];
};

namespace wick_emu {

// Runs `body(closure)` as every thread of the grid. Returns 0, or 1 with a message in
// `error` (NUL-terminated, at most `error_len` bytes).
int run(const WickLaunch& launch, const char* kernel, char* error, unsigned long error_len,
        void (*body)(void*), void* closure);

template <typename F>
int launch(const WickLaunch* l, const char* kernel, char* error, unsigned long error_len, F f) {
    return run(*l, kernel, error, error_len, [](void* c) { (*static_cast<F*>(c))(); }, &f);
}

}  // namespace wick_emu
