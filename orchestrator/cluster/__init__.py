"""TODO cluster"""
