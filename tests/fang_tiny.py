"""The tiny Fang f1 training config shared by the regression and epoch tests."""

from experiments.configs import fang_f1


def tiny_config(**kw):
  """f1, ATTENTION with 4 tokens, 6 epochs of 2000 points; ``kw`` overrides any key."""
  c = fang_f1.get_config()
  c.update(model='attention', num_tokens=4, epochs=6, batch_size=2000, checkpoint_every=1,
           tensorboard=False, grad_chunk=1000)
  c.update(**kw)
  return c
