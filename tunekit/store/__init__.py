"""The storage layer: the SQLite database of trials (WAL) with its JSONL log, and recovery tools."""
