"""Review of calls: marks on calls and turns, reasons, queues, the bad share (docs/ARCHITECTURE.md)."""
