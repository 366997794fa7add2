"""The documents' own objects: the custom Functions, the models, the data, LeNet's DDP
training. They import nothing of the machinery (demos.lab): what they need is passed in."""
