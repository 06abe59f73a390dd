"""The login node's analysis of a sweep before it is submitted (never imported by a job): the memory plan and the
models' shapes, the section 3.3 toy model, its study and the bias table."""
