"""History: what the GPUs and their processes did over time, in one SQLite file.

store.py holds the schema, its migrations, rollups and retention; recorder.py turns the
collector's snapshots into rows (`vram record`); query.py answers reports, job timelines and
"idle for how long" from it (`vram report`, `vram life`, kill --idle, doctor, the live view).
"""
