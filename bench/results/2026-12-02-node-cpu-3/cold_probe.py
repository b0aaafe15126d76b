import sys, time, statistics
import numpy as np
buf = np.random.randint(0, 255, 921600, dtype=np.uint8); out = np.empty_like(buf)
small = np.zeros(4096, np.float32)
def copy(): np.copyto(out, buf)
def py():
    s = 0
    for i in range(200):
        s += i * 3
    return s
def npsmall(): return float(small.sum())
def spin(sec):
    end = time.perf_counter() + sec
    while time.perf_counter() < end:
        pass
def run(f, wait, n=80):
    t = []
    for _ in range(n):
        wait()
        t0 = time.perf_counter(); f(); t.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(t)
for name, f in (('copy921k', copy), ('py200', py), ('np.sum4k', npsmall)):
    print(name, 'us: hot %.1f sleep33 %.1f spin33 %.1f' % (run(f, lambda: None), run(f, lambda: time.sleep(0.033)), run(f, lambda: spin(0.033))))
