"""Every command of `coordsim`; nothing imports this package.
"""
