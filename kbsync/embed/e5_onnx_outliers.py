"""The few input channels of each e5 linear layer that stretch its int8 activation scale.

``quantize_dynamic`` quantizes a MatMul's input with one scale per tensor, set by its
largest value. In multilingual-e5-small a handful of channels carry values tens of times
the others' (measured on 7 real zh + en chunks: removing the 4 largest channels of the
layer-4 FFN output's input cuts its int8 step from 1.34 to 0.095 of its RMS; the
LayerNorm outputs, 0.17-0.31 to 0.05-0.07), so everything else is rounded coarsely. The
``int8-outliers`` graph (:mod:`kbsync.embed.e5_onnx_export`) sends those channels through
a small fp32 MatMul instead.

The channels are found once, at export time, by running the fp32 graph on
:data:`CALIBRATION` (a fixed text, so the same source file gives the same graph) and
taking, per layer input, the :data:`~kbsync.embed.bert_graph.OUTLIER_CHANNELS` channels of largest absolute value
(:func:`kbsync.embed.bert_graph.channel_peaks`; MiniLM's graph uses the same split). The
outliers sit on the same channels whatever the text (they are the model's, not the
input's): the 8 found on this text cut the step nearly as much as the 8 found on the real
chunks themselves.
"""

from __future__ import annotations

import numpy as np

from kbsync.embed.bert_graph import channel_peaks as graph_channel_peaks
from kbsync.embed.e5_file import E5File

CALIBRATION = [
    "passage: Debian is a free operating system. Use apt to install packages; the daemon "
    "reads its configuration from /etc at start and logs to the journal.",
    "passage: 我们将学习如何配置网络服务，并讨论监控工具与虚拟化技术。安装系统时可以创建 RAID 和 LVM 卷。",
    "query: how do I undo the last commit in git?",
    "query: 如何在 Debian 中设置防火墙？",
]


def channel_peaks(model: E5File, fp32_graph) -> dict[str, np.ndarray]:
    """Per linear layer (``l3.fi``, ...), the largest |value| of each input channel over
    every token of :data:`CALIBRATION`.

    ``fp32_graph`` is :func:`~kbsync.embed.e5_onnx_export.build_graph`'s fp32 model.
    """
    from kbsync.embed.e5_tokenizer import E5Tokenizer

    cfg = model.config
    pos_type = (model.f32("emb.pos").reshape(cfg.max_positions, cfg.hidden)
                + model.f32("emb.type")[:cfg.hidden])
    tokenizer = E5Tokenizer(model)

    def embeds():
        for content in tokenizer.encode(CALIBRATION):
            ids = np.asarray([tokenizer.bos, *content[:cfg.max_positions - 2], tokenizer.eos])
            yield (model.word_embeddings.dequantize(ids) + pos_type[:len(ids)]).astype(np.float32)

    return graph_channel_peaks(fp32_graph, embeds())
