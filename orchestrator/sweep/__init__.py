"""TODO sweep"""
