"""The harness that benchmarks and tests share: throwaway databases, worker and CLI
subprocesses, scripted pipelines, a fake Cohere-compatible server and the chaos driver.

bench/ and tests/ import it; it imports neither (an import-linter contract keeps bench
off tests).
"""
