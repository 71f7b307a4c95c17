import time, sys
import imitation_meg as im
from imitation_meg.envs.emulator import enumerate_mdp
game, w, H = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = time.time()
try:
    mdp = enumerate_mdp(game, H, frame_stack=4, warmup=[0] * w, max_states=150000, observation_matrix=False)
except ValueError as e:
    print(e); sys.exit()
print(game, w, H, mdp.n_states, mdp.metadata["layer_sizes"], f"{time.time()-t:.0f}s", int(mdp.metadata["terminal"].sum()))
opt = im.meg(im.policies.optimal(mdp), mdp)
print("optimal return", opt.expected_utility, "uniform", opt.uniform_expected_utility, "optimal MEG", opt.meg)
