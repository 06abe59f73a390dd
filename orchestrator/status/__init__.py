"""TODO status"""
