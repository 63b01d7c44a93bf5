"""virtual"""
