"""Each full-size model's published parameter count and multiply-adds, with their sources.

The tests compare :func:`simdist.numerics.fullsize.param_count` and the XLA-costed forward
FLOPs of each model against these numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PUBLISHED", "Published"]


@dataclass(frozen=True)
class Published:
    """A model's published size and cost, with where they were published.

    ``multiply_adds`` is per example at the model's own input shape; XLA counts a multiply-add
    as two FLOPs, so the forward FLOPs to compare are ``2 * multiply_adds``.
    """

    params: float
    multiply_adds: float
    params_source: str
    flops_source: str


PUBLISHED: dict[str, Published] = {
    "resnet50": Published(
        25.6e6,
        4.09e9,
        "torchvision ResNet50_Weights.IMAGENET1K_V1: num_params 25,557,032 (25.6M)",
        "torchvision ResNet50_Weights.IMAGENET1K_V1: GFLOPS 4.09 (fvcore counts multiply-adds; "
        "v1.5, the paper's v1 is 3.8e9) "
        "https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet50.html",
    ),
    "resnet101": Published(
        44.5e6,
        7.80e9,
        "torchvision ResNet101_Weights.IMAGENET1K_V1: num_params 44,549,160 (44.5M)",
        "torchvision ResNet101_Weights.IMAGENET1K_V1: GFLOPS 7.80 (multiply-adds, v1.5) "
        "https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet101.html",
    ),
    "resnet152": Published(
        60.2e6,
        11.51e9,
        "torchvision ResNet152_Weights.IMAGENET1K_V1: num_params 60,192,808 (60.2M)",
        "torchvision ResNet152_Weights.IMAGENET1K_V1: GFLOPS 11.51 (multiply-adds, v1.5) "
        "https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet152.html",
    ),
    "resnet50_v1": Published(
        25.6e6,
        3.8e9,
        "the same parameters as v1.5: torchvision's 25,557,032",
        "He et al. 2016, 'Deep Residual Learning for Image Recognition', Table 1: ResNet-50 "
        "3.8e9 FLOPs (multiply-adds)",
    ),
    "resnet152_v1": Published(
        60.2e6,
        11.3e9,
        "the same parameters as v1.5: torchvision's 60,192,808",
        "He et al. 2016, 'Deep Residual Learning for Image Recognition', Table 1: ResNet-152 "
        "11.3e9 FLOPs (multiply-adds)",
    ),
    "vgg16": Published(
        138.4e6,
        15.47e9,
        "Simonyan & Zisserman 2015, Table 2 (138M); torchvision VGG16_Weights: 138,357,544",
        "torchvision VGG16_Weights.IMAGENET1K_V1: GFLOPS 15.47 (multiply-adds) "
        "https://pytorch.org/vision/stable/models/generated/torchvision.models.vgg16.html",
    ),
    "inception_v3": Published(
        23.8e6,
        5.71e9,
        "OpenVINO model card googlenet-v3-pytorch (torchvision inception_v3 without the "
        "auxiliary head): MParams 23.817 "
        "https://docs.openvino.ai/2021.1/omz_models_public_googlenet_v3_pytorch_googlenet_v3_"
        "pytorch.html",
        "torchvision Inception_V3_Weights.IMAGENET1K_V1: GFLOPS 5.71 (multiply-adds, 299x299; "
        "the OpenVINO card gives 11.469 GFLOPs) "
        "https://pytorch.org/vision/stable/models/generated/torchvision.models.inception_v3.html",
    ),
    "bert_base": Published(
        110e6,
        11.25e9,
        "Devlin et al. 2019, BERT-base: 'Total Parameters=110M'",
        "Jiao et al. 2020 (TinyBERT, arXiv:1909.10351), Table 1: BERT-base 22.5B FLOPs at "
        "sequence length 128, i.e. 11.25e9 multiply-adds (Hoffmann et al. 2022's Appendix F "
        "formula gives 22.4e9 FLOPs for the 12 layers)",
    ),
    "gpt2": Published(
        124e6,
        146.05e9,
        "Hugging Face model card openai-community/gpt2: 'the smallest version of GPT-2, with "
        "124M parameters' https://huggingface.co/openai-community/gpt2",
        "Hoffmann et al. 2022 (Chinchilla), Appendix F forward-pass FLOPs at sequence 1024 "
        "(12 layers, d=768, 12 heads, ffw 3072, vocab 50257): 292.1e9 FLOPs = 146.05e9 "
        "multiply-adds, leaving out its embedding term (a lookup, not a matmul)",
    ),
}
# The configurable gpt with its options left out is GPT-2 124M (catalog.GPT_DEFAULTS); its
# sizes at Megatron-LM's scale are checked against Narayanan et al. 2021's Table 1 and
# Sec. 5.1 formulas (tests/test_gpt_model.py).
PUBLISHED["gpt"] = PUBLISHED["gpt2"]
