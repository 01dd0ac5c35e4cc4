"""The built-ins each exercise asks the learner to build by hand, as PyTorch ships them, and the
torch operators behind them: plain lists, nothing imported.

The visible checks (``course_utils.checks``) name them to the learner and record them while the
learner's code runs; the grader's integrity audit (``course_grading.audit.forbidden``) reads them
from here, without importing the checks (whose first import records the kernel's namespaces).
The checks' modules hold these very lists, so the checks' record covers their contents.
"""

# 01_embeddings
ONE_HOT_BUILTINS = ["torch.nn.functional.one_hot"]
EMBED_BUILTINS = ["torch.nn.functional.embedding", "torch.embedding"]
EMBED_OPS = ["embedding", "_embedding_bag*"]

# 02_cosine_similarity
COSINE_BUILTINS = ["torch.nn.functional.cosine_similarity", "torch.cosine_similarity"]
COSINE_OPS = ["cosine_similarity"]

# 03_attention
SOFTMAX_BUILTINS = [
    "torch.softmax",
    "torch.nn.functional.softmax",
    "torch.Tensor.softmax",
    "torch.special.softmax",
    "torch.log_softmax",
    "torch.nn.functional.log_softmax",
    "torch.Tensor.log_softmax",
    "torch.nn.Softmax.forward",
]
SOFTMAX_OPS = ["_softmax", "_log_softmax", "_safe_softmax"]
ATTENTION_BUILTINS = [
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.MultiheadAttention.forward",
    "torch.nn.functional.multi_head_attention_forward",
]
ATTENTION_OPS = ["_scaled_dot_product*", "_safe_softmax", "_native_multi_head_attention"]

# 04_multi_head_attention: reusing scaled_dot_product_attention from notebook 03 (the learner's
# or the course's) is the point; the ready-made multi-head pieces are not.
MHA_BUILTINS = [
    "torch.nn.MultiheadAttention.forward",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.functional.scaled_dot_product_attention",
]
MHA_OPS = ["_scaled_dot_product*", "_native_multi_head_attention", "_safe_softmax"]

# 06_encoder to 09_gpt: PyTorch's attention and transformer layers, everywhere
EVERYWHERE = [
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.TransformerEncoderLayer.forward",
    "torch.nn.TransformerDecoderLayer.forward",
    "torch.nn.TransformerEncoder.forward",
    "torch.nn.TransformerDecoder.forward",
    "torch.nn.Transformer.forward",
    "torch.nn.MultiheadAttention.forward",
]
EVERYWHERE_OPS = [
    "_scaled_dot_product*",
    "_safe_softmax",
    "_native_multi_head_attention",
    "_transformer_encoder_layer_fwd",
]
LAYER_NORM_BUILTINS = EVERYWHERE + [
    "torch.nn.LayerNorm.forward",
    "torch.nn.functional.layer_norm",
    "torch.layer_norm",
    "torch.native_layer_norm",
]
LAYER_NORM_OPS = EVERYWHERE_OPS + ["native_layer_norm"]
