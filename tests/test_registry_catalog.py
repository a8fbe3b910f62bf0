"""The built-in task_specs/ against ../shared/CATALOG.md: 77 datasets, 92 tasks.

Checked with the real format registry (data_adapters), so a spec naming a
format, option or field the adapters do not have fails here.
"""
from collections import Counter

from mtl_framework.config import registry

# CATALOG.md section 1, the dataset ids (77).
DATASETS = """
afqmc tnews iflytek ocnli cmnli csl cluewsc2020 cmrc2018 drcd chid c3 cluener eprstmt bustm csldcp
cmeee cmeie chip_cdn chip_sts chip_ctc kuake_qic kuake_qtr kuake_qqr lcqmc bq pawsx_zh xnli_zh atec
stsb_zh chinese_sts cnsd_snli qbqtc nlpcc_dbqa cail2019_scm sohu2021 dureader_yesno seabsa16_phns
seabsa16_came chnsenticorp nlpcc14_sc weibo_senti_100k online_shopping waimai_10k simplifyweibo dmsc_v2
clue_emotion smp2020_ewect inews thucnews fudan toutiao nlpcc2017_news cail2018 dureader_robust
dureader_checklist cail2019_rc webqa sogouqa reco cmrc2019 cmrc2017 msra_ner peoples_daily weibo_ner
resume_ner boson_ner yidu_s4k cote_bd cote_mfw cote_dp duie2 finre sanwen ipre duee1 duee_fin ccks19_event
""".split()

# CATALOG.md section 2, T01..T92: task name -> family. cmrc2017 is mrc_span here, not
# the catalog's cloze: its release has no candidate list, the answer is a word of the
# document (issue 23; task_specs/cmrc2017.yaml).
C, M, R, Q, MC, CZ = "classification", "matching", "regression", "mrc_span", "multiple_choice", "cloze"
NER, REL, EV, CO = "extraction_ner", "extraction_relation", "extraction_event", "coreference"
TASKS = {
    "afqmc": M, "tnews": C, "iflytek": C, "ocnli": M, "cmnli": M, "csl": M, "cluewsc": CO,
    "cmrc2018": Q, "drcd": Q, "chid": CZ, "c3_d": MC, "c3_m": MC, "cluener": NER, "eprstmt": C,
    "bustm": M, "csldcp": C, "cmeee_flat": NER, "cmeee_sym": NER, "cmeie_ent": NER, "cmeie_spo": REL,
    "cdn_pair": M, "cdn_num": C, "chip_sts": M, "chip_ctc": C, "kuake_qic": C, "kuake_qtr": M,
    "kuake_qqr": M, "lcqmc": M, "bq": M, "pawsx": M, "xnli": M, "atec": M, "stsb_zh": R,
    "chinese_sts": R, "cnsd_snli": M, "qbqtc": M, "nlpcc_dbqa": M, "cail2019_scm": M, "sohu_A": M,
    "sohu_B": M, "dureader_yesno": C, "seabsa16_phns": C, "seabsa16_came": C, "chnsenticorp": C,
    "nlpcc14_sc": C, "weibo_senti": C, "shopping_cat": C, "shopping_sent": C, "waimai": C,
    "simplifyweibo": C, "dmsc": C, "clue_emotion": C, "smp_usual": C, "smp_virus": C, "inews": C,
    "thucnews": C, "fudan": C, "toutiao": C, "nlpcc2017": C, "cail_charge": C, "cail_article": C,
    "dureader_robust": Q, "dureader_checklist": Q, "cjrc_span": Q, "cjrc_cls": C, "webqa": Q,
    "sogouqa": Q, "reco": MC, "cmrc2019": CZ, "cmrc2017": Q, "msra": NER, "peoples_daily": NER,
    "weibo_nam": NER, "weibo_nom": NER, "resume": NER, "boson": NER, "yidu_s4k": NER, "cote_bd": NER,
    "cote_mfw": NER, "cote_dp": NER, "duie_ent": NER, "duie_spo": REL, "finre": REL, "sanwen_ner": NER,
    "sanwen_re": REL, "ipre": REL, "duee_trigger": EV, "duee_arg": EV, "dueefin_type": EV,
    "dueefin_arg": EV, "dueefin_enum": C, "ccks19_subject": EV,
}

FAMILY_COUNTS = {C: 30, M: 20, R: 2, Q: 8, MC: 3, CZ: 2, NER: 16, REL: 5, EV: 5, CO: 1}
# Beyond the catalog's 92: sentence-embedding tasks (issue 43) read from the same releases,
# a second task in their dataset's spec.
EMBEDDING_TASKS = {
    "afqmc_sts": "afqmc", "atec_sts": "atec", "bq_sts": "bq", "lcqmc_sts": "lcqmc",
    "pawsx_sts": "pawsx_zh", "qbqtc_sts": "qbqtc", "stsb_zh_sts": "stsb_zh",
    "ocnli_pairs": "ocnli", "cmnli_pairs": "cmnli", "cmrc2018_retrieval": "cmrc2018",
    "drcd_retrieval": "drcd", "dureader_robust_retrieval": "dureader_robust",
    "dureader_checklist_retrieval": "dureader_checklist", "cjrc_span_retrieval": "cail2019_rc",
    "webqa_retrieval": "webqa", "sogouqa_retrieval": "sogouqa",
}


def test_the_catalog_tables_add_up():
    assert len(DATASETS) == len(set(DATASETS)) == 77
    assert len(TASKS) == 92
    assert Counter(TASKS.values()) == FAMILY_COUNTS


def test_builtin_specs_hold_the_whole_catalog():
    reg = registry.load_registry()  # raises SpecValidationError listing every problem
    missing = sorted(set(DATASETS) - set(reg.datasets))
    assert not missing, f"datasets without a spec in task_specs/: {missing}"
    assert sorted(reg.datasets) == sorted(DATASETS)
    catalog = {name: task for name, task in reg.tasks.items() if name not in EMBEDDING_TASKS}
    assert {name: task.type for name, task in catalog.items()} == TASKS
    assert Counter(task.type for task in catalog.values()) == FAMILY_COUNTS
    assert {name: reg.tasks[name].dataset for name in EMBEDDING_TASKS} == EMBEDDING_TASKS
    assert {reg.tasks[name].type for name in EMBEDDING_TASKS} == {"contrastive"}
    assert (sorted(name for name, task in reg.tasks.items() if task.multi_label)
            == ["cail_article", "cail_charge"])


def test_builtin_label_lists_resolve_where_they_ship_with_the_specs():
    reg = registry.load_registry()
    for task in reg.tasks.values():
        places = task.label_file_places() if task.label_file else []
        if task.labels is not None or any(p.is_file() for p in places):
            labels = task.resolve_labels()
            assert labels and len(labels) == len(set(labels)), task.name
    expected_sizes = {"chip_ctc": 44, "cmeie_spo": 44, "finre": 44, "ipre": 35, "duee_trigger": 65,
                      "duee_arg": 217, "dueefin_type": 13, "ccks19_subject": 21}
    sizes = {name: len(reg.tasks[name].resolve_labels()) for name in expected_sizes if name in reg.tasks}
    assert sizes == expected_sizes
