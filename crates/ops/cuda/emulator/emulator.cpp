// The scheduler behind emulate.h: runs a kernel over a grid, each block's threads as fibers
// (ucontext) on one OS thread, blocks on several OS threads. Errors (a barrier not every
// thread reaches, a shuffle in an incomplete warp, a launch outside CUDA's limits) stop the
// launch and are returned as a message.
#include "emulator.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace wick_emu {

thread_local const ThreadVars* current = nullptr;

namespace {

enum class State { Ready, AtBlockBarrier, AtWarpBarrier, Done };

// A suspended execution context. On x86-64 a switch saves the callee-saved registers on
// the stack and swaps stack pointers (no system call, unlike swapcontext, which saves the
// signal mask: a block's threads switch at every barrier, so this is most of the run
// time); elsewhere it is ucontext.
#if defined(__x86_64__)
struct Context {
    void* sp = nullptr;
};

extern "C" void wick_emu_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .globl wick_emu_switch
    .type wick_emu_switch, @function
wick_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size wick_emu_switch, .-wick_emu_switch
)");

void switch_to(Context& from, Context& to) { wick_emu_switch(&from.sp, to.sp); }

// A context that starts `entry` (which never returns) on `stack`.
void start_on(Context& c, char* stack, size_t size, void (*entry)()) {
    uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
    void** sp = (void**)top;
    *--sp = nullptr;          // entry's return address: it never returns
    *--sp = (void*)entry;     // popped by `ret` in wick_emu_switch
    for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp, rbx, r12-r15
    c.sp = sp;
}
#else
struct Context {
    ucontext_t uc;
};
void switch_to(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
void start_on(Context& c, char* stack, size_t size, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
#endif

struct Fiber {
    Context context;
    ThreadVars vars;
    unsigned int linear = 0;
    State state = State::Ready;
};

// A kernel body longer than this much stack is not one of wick's.
constexpr size_t kStackBytes = 64 * 1024;
constexpr unsigned int kWarp = 32;

struct Block {
    std::vector<Fiber> fibers;
    std::vector<char> stacks;
    // Per warp: 32 lanes of up to 8 bytes for shuffles.
    std::vector<uint64_t> exchange;
    Context scheduler;
    Fiber* running = nullptr;
    void (*body)(void*) = nullptr;
    void* closure = nullptr;
    std::string error;
};

thread_local Block* block = nullptr;

void fail(const std::string& message) {
    if (block->error.empty()) block->error = message;
}

std::string where(const Fiber& f) {
    char buf[128];
    snprintf(buf, sizeof buf, "thread (%u,%u,%u) of block (%u,%u,%u)", f.vars.thread_idx.x,
             f.vars.thread_idx.y, f.vars.thread_idx.z, f.vars.block_idx.x, f.vars.block_idx.y,
             f.vars.block_idx.z);
    return buf;
}

// Every fiber starts here, and ends by switching to the scheduler for good.
void fiber_main() {
    Block* b = block;
    b->body(b->closure);
    b->running->state = State::Done;
    switch_to(b->running->context, b->scheduler);
    abort();  // a finished fiber is never resumed
}

// Switches from the running fiber back to the scheduler, in `state`.
void wait(State state) {
    Fiber* f = block->running;
    f->state = state;
    // After a failed launch, a waiting fiber is never resumed.
    switch_to(f->context, block->scheduler);
}

// Releases barriers that every participant reached; reports the ones that can never be.
// Returns whether any fiber became ready.
bool release(Block& b) {
    size_t n = b.fibers.size();
    bool any = false;
    // Warp barriers (shuffles, __syncwarp): all lanes of the warp.
    for (size_t w = 0; w * kWarp < n; ++w) {
        size_t lo = w * kWarp, hi = std::min(n, lo + kWarp);
        size_t waiting = 0, done = 0;
        for (size_t i = lo; i < hi; ++i) {
            waiting += b.fibers[i].state == State::AtWarpBarrier;
            done += b.fibers[i].state == State::Done;
        }
        if (waiting == 0) continue;
        if (waiting == hi - lo) {
            for (size_t i = lo; i < hi; ++i) b.fibers[i].state = State::Ready;
            any = true;
        } else if (done > 0) {
            for (size_t i = lo; i < hi; ++i)
                if (b.fibers[i].state == State::Done) {
                    fail("a full-warp shuffle or __syncwarp waits for " + where(b.fibers[i]) +
                         ", which has returned");
                    return false;
                }
        }
    }
    if (any) return true;
    size_t at_block = 0, done = 0;
    for (auto& f : b.fibers) {
        at_block += f.state == State::AtBlockBarrier;
        done += f.state == State::Done;
    }
    if (at_block == 0) return false;
    if (at_block == n) {
        for (auto& f : b.fibers) f.state = State::Ready;
        return true;
    }
    for (auto& f : b.fibers) {
        if (f.state == State::Done) {
            fail("__syncthreads waits for " + where(f) + ", which has returned");
            return false;
        }
        if (f.state == State::AtWarpBarrier) {
            fail("__syncthreads waits for " + where(f) +
                 ", which waits at a warp shuffle or __syncwarp that not all of its warp reach");
            return false;
        }
    }
    return false;
}

// Runs one block to the end. The order alternates between phases (ascending, then
// descending thread index) so that a read of shared memory before the barrier that
// publishes it sees a stale value in one of the two orders.
void run_block(Block& b, const WickLaunch& l, uint3 block_idx) {
    size_t n = (size_t)l.block[0] * l.block[1] * l.block[2];
    b.fibers.assign(n, Fiber{});
    b.stacks.resize(n * kStackBytes);
    b.exchange.assign(((n + kWarp - 1) / kWarp) * kWarp, 0);
    for (size_t i = 0; i < n; ++i) {
        Fiber& f = b.fibers[i];
        f.linear = (unsigned int)i;
        f.vars.thread_idx = uint3{(unsigned int)(i % l.block[0]),
                                  (unsigned int)((i / l.block[0]) % l.block[1]),
                                  (unsigned int)(i / ((size_t)l.block[0] * l.block[1]))};
        f.vars.block_idx = block_idx;
        f.vars.block_dim = dim3{l.block[0], l.block[1], l.block[2]};
        f.vars.grid_dim = dim3{l.grid[0], l.grid[1], l.grid[2]};
        start_on(f.context, b.stacks.data() + i * kStackBytes, kStackBytes, fiber_main);
    }
    bool ascending = true;
    for (;;) {
        for (size_t k = 0; k < n; ++k) {
            Fiber& f = b.fibers[ascending ? k : n - 1 - k];
            if (f.state != State::Ready) continue;
            b.running = &f;
            current = &f.vars;
            switch_to(b.scheduler, f.context);
            if (!b.error.empty()) return;
        }
        ascending = !ascending;
        bool all_done = std::all_of(b.fibers.begin(), b.fibers.end(),
                                    [](const Fiber& f) { return f.state == State::Done; });
        if (all_done) return;
        if (!release(b)) {
            fail("the block's threads wait at barriers that can never open");
            return;
        }
    }
}

std::string check_launch(const WickLaunch& l) {
    char buf[256];
    unsigned long long threads = (unsigned long long)l.block[0] * l.block[1] * l.block[2];
    if (threads == 0 || l.grid[0] == 0 || l.grid[1] == 0 || l.grid[2] == 0) {
        snprintf(buf, sizeof buf, "empty launch: grid (%u,%u,%u), block (%u,%u,%u)", l.grid[0],
                 l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2]);
        return buf;
    }
    if (threads > 1024 || l.block[2] > 64) {
        snprintf(buf, sizeof buf, "block (%u,%u,%u) is past CUDA's 1024 threads per block",
                 l.block[0], l.block[1], l.block[2]);
        return buf;
    }
    if (l.grid[0] > 2147483647u || l.grid[1] > 65535 || l.grid[2] > 65535) {
        snprintf(buf, sizeof buf, "grid (%u,%u,%u) is past CUDA's limits (2^31-1, 65535, 65535)",
                 l.grid[0], l.grid[1], l.grid[2]);
        return buf;
    }
    return "";
}

}  // namespace

void sync_block() { wait(State::AtBlockBarrier); }

void sync_warp(unsigned int mask) {
    Fiber* f = block->running;
    size_t n = block->fibers.size();
    size_t lo = f->linear / kWarp * kWarp;
    if (mask != 0xffffffffu || lo + kWarp > n) {
        fail("__syncwarp or a shuffle with mask " + std::to_string(mask) + " in a warp of " +
             std::to_string(std::min(n - lo, (size_t)kWarp)) +
             " lanes: wick's kernels use whole warps only");
        wait(State::AtWarpBarrier);
        return;
    }
    wait(State::AtWarpBarrier);
}

void shuffle(unsigned int mask, const void* in, void* out, unsigned int size, int mode, int arg,
             int width) {
    Fiber* f = block->running;
    unsigned int lane = f->linear % kWarp;
    uint64_t* slots = block->exchange.data() + f->linear / kWarp * kWarp;
    uint64_t mine = 0;
    memcpy(&mine, in, size);
    slots[lane] = mine;
    sync_warp(mask);
    unsigned int w = (unsigned int)width, base = lane / w * w, src = lane;
    switch (mode) {
        case 0: src = base + ((unsigned int)arg % w); break;
        case 1: src = lane % w + arg < w ? lane + arg : lane; break;
        case 2: src = lane % w >= (unsigned int)arg ? lane - arg : lane; break;
        default: src = ((lane ^ (unsigned int)arg) / w == lane / w) ? lane ^ arg : lane; break;
    }
    uint64_t value = slots[src];
    // Everyone has read before anyone writes the slots again.
    sync_warp(mask);
    memcpy(out, &value, size);
}

int run(const WickLaunch& l, const char* kernel, char* error, unsigned long error_len,
        void (*body)(void*), void* closure) {
    std::string message = check_launch(l);
    unsigned long long blocks = (unsigned long long)l.grid[0] * l.grid[1] * l.grid[2];
    if (message.empty()) {
        unsigned int workers = std::min<unsigned long long>(
            blocks, std::max(1u, std::min(4u, std::thread::hardware_concurrency())));
        std::atomic<unsigned long long> next{0};
        std::mutex first_error;
        auto work = [&] {
            Block b;
            b.body = body;
            b.closure = closure;
            block = &b;
            for (;;) {
                unsigned long long i = next.fetch_add(1);
                if (i >= blocks) break;
                uint3 idx{(unsigned int)(i % l.grid[0]), (unsigned int)((i / l.grid[0]) % l.grid[1]),
                          (unsigned int)(i / ((unsigned long long)l.grid[0] * l.grid[1]))};
                run_block(b, l, idx);
                if (!b.error.empty()) {
                    std::lock_guard<std::mutex> g(first_error);
                    if (message.empty()) message = b.error;
                    next.store(blocks);
                    break;
                }
            }
            block = nullptr;
            current = nullptr;
        };
        std::vector<std::thread> threads;
        for (unsigned int t = 1; t < workers; ++t) threads.emplace_back(work);
        work();
        for (auto& t : threads) t.join();
    }
    if (message.empty()) return 0;
    message = std::string(kernel) + ": " + message;
    if (error && error_len > 0) {
        size_t n = std::min(message.size(), (size_t)error_len - 1);
        memcpy(error, message.data(), n);
        error[n] = 0;
    }
    return 1;
}

}  // namespace wick_emu
