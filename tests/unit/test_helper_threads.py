"""`distributed.serial_helper_threads`: a thread that starts inside it (as DeepSpeed's gloo threads do) keeps one
intra-op thread for good, and the calling thread gets its own count back (trainer/model/distributed.py says why)."""

import threading

import torch

from trainer.model.distributed import serial_helper_threads


def _thread_that_keeps_running(seen: list[int], ready: threading.Event, go_on: threading.Event):
    def run():
        seen.append(torch.get_num_threads())  # the thread's first parallel-runtime call sizes its team
        ready.set()
        go_on.wait()
        seen.append(torch.get_num_threads())  # later, after the block is over
    return threading.Thread(target=run)


def test_a_thread_started_inside_keeps_one_thread_after_it_and_the_caller_gets_its_count_back():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen, ready, go_on = [], threading.Event(), threading.Event()
        with serial_helper_threads(gpu=False):
            assert torch.get_num_threads() == 1
            helper = _thread_that_keeps_running(seen, ready, go_on)
            helper.start()
            ready.wait()
        assert torch.get_num_threads() == 2
        go_on.set()
        helper.join()
        assert seen == [1, 1]
        # A thread started outside the block takes the process's count: what the block exists to avoid.
        outside = []
        t = threading.Thread(target=lambda: outside.append(torch.get_num_threads()))
        t.start()
        t.join()
        assert outside == [2]
    finally:
        torch.set_num_threads(before)


def test_on_gpu_the_block_changes_nothing():
    before = torch.get_num_threads()
    with serial_helper_threads(gpu=True):
        assert torch.get_num_threads() == before
