"""TODO baselines"""
