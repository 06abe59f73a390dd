"""A cell's identity: run_key and eval_id (run_key), every config field classified by what it changes (fields), and
what a model's weights are whatever names them (weights)."""
