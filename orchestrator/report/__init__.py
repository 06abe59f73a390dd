"""The paper's tables and figures from a sweep's rows: the data and the document as blocks (`paper.py`, pure), the
page they make, report.md and report.html, rendered by Jinja2 from the templates beside it (`page.py`,
report.md.jinja, report.html.jinja), Figure 7 (`asynchronous.py`), the late-training table (`late.py`), the base
models (`base_models.py`), the cells missing from the report (`missing.py`), the plots (`plots.py`, matplotlib), the
toy study's Figure 1 (`synthetic.py`), the curves read from MLflow or the run directories (`histories.py`) and what
the claims are handed (`claim_inputs.py`; the claims themselves are claims/'s). `write.py` is `orchestrate report`'s
work from the sweep to its files. Reads status/'s rows; writes only the report's files. Last in the flow: it may
import every other subpackage.
"""
