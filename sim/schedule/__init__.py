"""Schedules: the IR (ir.py: one forward pass as ordered ops), the builder of the layers' pieces
(builder.py), the schedule language (language.py: "ladder:16" -> a plan -> a Schedule), schedules made
from schedules (transform.py), and one module per schedule (schedules/, with its registry).

Owns: Op, Schedule, the registry. May import: model/, stack/ and the sim leaves.
"""
