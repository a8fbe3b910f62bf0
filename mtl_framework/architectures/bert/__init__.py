"""BERT (Devlin et al., 2019): learned absolute positions, token types, biases, GELU,
post-LN blocks with LayerNorm (gamma, beta). Google's Chinese BERT, HFL's
RoBERTa-wwm-ext and MacBERT are this architecture with a BERT vocab.txt."""
BACKBONE = "BertBackbone"
TITLE = "BERT"
CONVERTERS = {
    "bert4keras": "mtl_framework.architectures.bert.checkpoint",   # Google's TF release
    "keras-hub": "mtl_framework.architectures.bert.keras_hub",
    "transformers": "mtl_framework.architectures.bert.transformers",
}
