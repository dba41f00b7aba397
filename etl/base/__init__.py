"""The ground floor: errors and exit codes, the worker-to-user error path, signals, the
writers a clean-up waits for, test pause points, quieting native stderr, sizes and
durations, bounded YAML loading.
Imports nothing of ours: every other package may import it.
"""
