"""Tests of the lecture tooling room: training, evaluation and model cards."""
