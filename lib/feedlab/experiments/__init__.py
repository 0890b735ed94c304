"""Experiment code behind the notebooks: one module per notebook, plus shared runners."""
