"""The tuning layer: the tuner (Algorithm 1), its budget, the guard around plugin calls,
transfer learning and progress display."""
