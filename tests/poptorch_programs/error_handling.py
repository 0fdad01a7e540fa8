"""PopTorch user guide, error handling: PopTorch's error classes caught in order, most specific
first, around a model that runs and around one used after ``destroy()``.

``import poptorch`` became ``import xlgraph.poptorch as poptorch``.
"""
import torch

import xlgraph.poptorch as poptorch


class PytorchModel(torch.nn.Module):
    def __init__(self, model_param):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor([model_param]))

    def forward(self, x, y):
        return (x + y) * self.scale


def run(model_param, destroy):
    """The user guide's handler, returning what it printed."""
    try:
        m = PytorchModel(model_param)
        inference_model = poptorch.inferenceModel(m)
        t1 = torch.tensor([1.])
        t2 = torch.tensor([2.])
        assert inference_model(t1, t2) == 3.0 * model_param
        if destroy:
            inference_model.destroy()
        inference_model.copyWeightsToDevice()   # needs a compiled model
        return "ok"
    except poptorch.RecoverableError as e:
        print(e)
        return f"reset: {e.recovery_action}"
    except poptorch.UnrecoverableError as e:
        print(f"Unrecoverable error: machine needs to be taken offline: {e}")
        return "offline"
    except poptorch.Error as e:
        print(f"Received {e.message} from component {e.type}, location: {e.location}")
        # Or you could just print all the information at once:
        print(e)
        return e
    except Exception as e:
        print(e)
        return "other"


success = run(1.0, destroy=False)
failure = run(2.0, destroy=True)
