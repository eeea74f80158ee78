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
