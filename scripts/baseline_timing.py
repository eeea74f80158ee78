"""How the PyTorch baselines time a step: `warmup` untimed calls, then the median of
`reps` timed ones, in milliseconds."""
import statistics
import time


def median_ms(step, warmup, reps):
    for _ in range(warmup):
        step()
    ms = []
    for _ in range(reps):
        t = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t) * 1e3)
    return round(statistics.median(ms), 3)


def add_timing_args(parser, threads=2):
    """The timing flags every baseline takes: --threads, --warmup, --reps."""
    parser.add_argument("--threads", type=int, default=threads)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
