"""Calls turned into Pipecat eval scenarios (issue 36): a reviewed call becomes a test the next deployment runs."""
