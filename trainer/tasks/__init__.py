"""What a run trains and evaluates on: the prompts (data), answer grading (rewards), the helpers the tasks share
(common) and one module per generated task (tiny, small_sums, fraction)."""
