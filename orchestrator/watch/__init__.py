"""TODO watch"""
