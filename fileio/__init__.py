"""Files and processes, one policy for all of tpsim (the simulator, the harness, calibration and the
commands alike): an output is a regular file or `-`, written atomically, its side files opened
without following links (policy.py); an input is a bounded regular file read as text with its name
in every error (policy.py); one writer per output, by an advisory lock (lock.py); a checkpoint of
finished points, one JSON line each (checkpoint.py); child processes that die with their parent
(proc_tie.py). Imports nothing of tpsim, so every layer may use it. Import the modules (this file
imports nothing, so they can import each other without a cycle)."""
