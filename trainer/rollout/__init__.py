"""How responses are generated: the engines' one interface and its registry (engine), HF generate and vLLM
(hf_engine, vllm_engine, vllm_support), the tokens that end a response, and the sampler with its rollout queue."""
