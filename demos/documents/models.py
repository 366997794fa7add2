"""The nn.Modules the scenarios train: document 004's LeNet-style Net, and a Linear layer
built on LinearFunction. (Kept out of the scenario files, which import torch only in `run`.)"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from demos.documents.functions import LinearFunction


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3)  # 1 input channel, 6 output channels, 3x3 kernel
        self.conv2 = nn.Conv2d(6, 16, 3)
        self.fc1 = nn.Linear(16 * 6 * 6, 120)  # 6x6 from the image dimension
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):                           # (B, 1, 32, 32)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (B, 6, 15, 15)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # (B, 16, 6, 6)
        x = torch.flatten(x, 1)                     # (B, 576)
        x = F.relu(self.fc1(x))                     # (B, 120)
        x = F.relu(self.fc2(x))                     # (B, 84)
        return self.fc3(x)                          # (B, 10)


class Linear(nn.Module):
    def __init__(self, input_features, output_features, bias=True):
        super().__init__()
        self.input_features = input_features
        self.output_features = output_features
        # nn.Parameter: registered as the module's parameter, requires grad by default
        self.weight = nn.Parameter(torch.empty(output_features, input_features))
        if bias:
            self.bias = nn.Parameter(torch.empty(output_features))
        else:
            self.register_parameter("bias", None)  # register optional parameters as None
        nn.init.uniform_(self.weight, -0.1, 0.1)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -0.1, 0.1)

    def forward(self, input):
        return LinearFunction.apply(input, self.weight, self.bias)
