"""The paper's tables and figures from a sweep's rows: the data and the Markdown/HTML document (`paper.py`,
pure), Figure 7 (`asynchronous.py`), the late-training table (`late.py`), the base models (`base_models.py`), the
cells missing from the report (`missing.py`), the plots (`plots.py`, matplotlib) and the toy study's Figure 1
(`synthetic.py`). Reads status/'s rows; writes only the report's files. Last in the flow.
"""
