"""``python -m bench.harness.rusage OUT CMD...``: run CMD, then write its exit code, peak
RSS and CPU (``wait4``) to the file OUT as JSON, and exit as it did.

Linux carries a process's peak RSS (``ru_maxrss``) over from its parent across fork and
exec, so a child of a benchmark reports at least the benchmark's own peak (bench.ingest,
with PyMuPDF imported: ~160 MB), whatever it used itself. Started from this small
interpreter, CMD's figure starts from this one's (~10 MB) instead. Like any ``wait4``
figure it covers CMD's own reaped children too (a worker's parser process): the largest
of them, not their sum.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: python -m bench.harness.rusage OUT CMD...", file=sys.stderr)
        return 2
    out, cmd = argv[1], argv[2:]
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    report = {
        "exit_code": code,
        "max_rss_kb": usage.ru_maxrss,  # KiB on Linux
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }
    with open(out, "w") as sink:
        json.dump(report, sink)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
