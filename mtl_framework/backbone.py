"""RoFormerV2's names where code written before there were other architectures
imports them (`from mtl_framework.backbone import RoFormerV2Backbone`). The backbones
themselves are in architectures/<name>/; a backbone of any architecture is built by
`architectures.build_backbone(config)`."""
from mtl_framework.architectures.roformer_v2.backbone import RoFormerV2Backbone
from mtl_framework.architectures.roformer_v2.presets import PRESETS, backbone_config
from mtl_framework.layers import resolve_exact_padding

__all__ = ["PRESETS", "RoFormerV2Backbone", "backbone_config", "resolve_exact_padding"]
